"""Evaluation: attachment scores, speed and calibration."""
