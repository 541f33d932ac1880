"""Training jobs: a job queue on SQLite, a scheduler that trains each job in a child process, and the
standalone worker (``python -m service.worker``).

Data layout under the service's data directory (see ``layout``)::

    jobs.sqlite3                  the job table and the per-name model version counters
    uploads/<job_id>/train.conllu the uploaded treebanks (dev.conllu optional), written by the app
    models/<name>/v<N>/           trained models (default trained-model directory)

This package imports nothing heavy (no numpy): a training child process must set its thread limits
before numpy is first imported.
"""
