"""One router per resource: parsing (/parse, /marginals, /confidence, /kbest, /sample), /models, /jobs, and
operations (/healthz, /readyz, /metrics, the page at /)."""
