"""Inference over factor graphs: loopy BP (Smith & Eisner 2008), its reverse mode (Stoyanov et al. 2011),
relaxed BP (Riedel & Smith 2010), and their settings. The exact tree kernels are in ``engine.kernels``."""
