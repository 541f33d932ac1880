"""CoNLL-U input and output (the first stage of the data flow)."""
