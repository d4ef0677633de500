# The dreads image: the `dreads` command (worker, flower, migrate, sim, submit, ...).
# Build: docker build -t dreads:latest .   (docker compose builds it as ${DREADS_IMAGE}).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HF_HOME=/hf

WORKDIR /opt/dreads
COPY . .
# Editable on purpose: `dreads db upgrade` reads migrations/ next to the package source.
RUN pip install -e . \
    && useradd --create-home --uid 10001 dreads \
    && mkdir -p /hf /data \
    && chown dreads:dreads /hf /data

USER dreads
CMD ["dreads", "--help"]
