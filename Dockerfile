# API image: `python -m service` on port 8000 with the shipped models in /app/models and the job store,
# uploads and models trained by jobs in the /data volume. docker-compose.yml runs the same image as
# `api` (this CMD, --workers 0: the web process never trains), `jobs` (python -m service.worker), and a Dask
# cluster: `scheduler` (dask scheduler) and `worker` (dask worker), hence the `cluster` extra.
# Checked for real by `python bench/deploy_check.py` (build, compose up, parse, train, restart, teardown);
# it builds with the legacy builder too (`DOCKER_BUILDKIT=0 docker build -t bp-parser:latest .`), so no
# `# syntax=` line: that would make BuildKit fetch a frontend image from a registry.

# --- build: install the package and its dependencies into a virtualenv ---------------------------
FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 NUMBA_CACHE_DIR=/opt/numba-cache
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
WORKDIR /src
COPY pyproject.toml README.md ./
COPY engine ./engine
COPY service ./service
# The runtime needs neither pip nor the libraries' own test suites (about 75 MB of numpy/scipy tests,
# pip and setuptools); bench/deploy_check.py parses and trains in the image, so what is left must work.
# The compiled kernels (numba) are compiled here, once, into NUMBA_CACHE_DIR: the runtime loads them from there
# instead of compiling at every start (numba needs that directory writable by the user that runs it).
RUN pip install '.[cluster]' \
    && pip uninstall --yes pip setuptools \
    && find /opt/venv -depth -type d -path '*/site-packages/*' -name tests -exec rm -rf {} + \
    && cd / && python -m engine.compiled

# --- runtime: the virtualenv, the models and a non-root user -------------------------------------
FROM python:3.11-slim AS runtime
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 \
    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1 NUMBA_NUM_THREADS=1 \
    NUMBA_CACHE_DIR=/opt/numba-cache
RUN groupadd --gid 10001 parser \
    && useradd --uid 10001 --gid parser --create-home --shell /usr/sbin/nologin parser \
    && mkdir /data && chown parser:parser /data
COPY --from=build /opt/venv /opt/venv
COPY --from=build --chown=10001:10001 /opt/numba-cache /opt/numba-cache
WORKDIR /app
# A directory COPY keeps the symlinks inside it: models/en_ewt -> en_ewt-joint stays an alias.
COPY models ./models
USER 10001:10001
# Job store (SQLite), uploads and trained models (/data/models); a new named volume takes this
# directory's owner, so the parser user can write to it.
VOLUME ["/data"]
EXPOSE 8000
# slim has no curl: urlopen raises on any non-2xx answer (503 until the models are loaded). A 10 s
# interval because Docker 20.10 has no --start-interval: the first check runs one interval after start.
HEALTHCHECK --interval=10s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/readyz', timeout=4)"]
CMD ["python", "-m", "service", "--host", "0.0.0.0", "--port", "8000", "--models-dir", "/app/models", "--data-dir", "/data", "--workers", "0"]
