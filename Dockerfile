# Minimal image for the parsing engine; the service issue turns this into the API image.
# Docker does not run on the development machines: this file is kept correct by inspection.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 \
    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1

RUN useradd --create-home --uid 10001 parser
WORKDIR /app
COPY pyproject.toml README.md ./
COPY engine ./engine
COPY service ./service
COPY models ./models
RUN pip install --no-cache-dir . && chown -R parser /app
USER parser

# Parse CoNLL-U from stdin to stdout with the shipped English model.
ENTRYPOINT ["python", "-m", "engine"]
CMD ["parse", "--model", "models/en_ewt-o1"]
