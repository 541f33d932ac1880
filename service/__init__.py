"""HTTP service (FastAPI). Built in the service issue; this package is a placeholder until then."""
