"""Trainers: conditional log-likelihood with AdaGrad."""
