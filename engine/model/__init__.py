"""Saving and loading models: plain arrays plus a JSON manifest, never pickle."""
