# One image for every Cascade service (ingest, prepare, orchestrator, simulator, api).
# docker-compose.yml picks the service with `command: python -m services.<name>`.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app

# Dependencies first (this layer is cached while only the code changes).
COPY pyproject.toml README.md ./
RUN python -c "import tomllib; print('\\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" > /tmp/requirements.txt \
 && pip install -r /tmp/requirements.txt

# The code, installed in place so the bundled samples/ next to it are found.
COPY shared ./shared
COPY services ./services
COPY programs ./programs
COPY samples ./samples
RUN pip install --no-deps -e . \
 && useradd --system --uid 10001 --home-dir /var/lib/cascade --create-home cascade

USER cascade
ENV CASCADE_DATA_DIR=/var/lib/cascade \
    CASCADE_HTTP_HOST=0.0.0.0 \
    CASCADE_HTTP_PORT=8080 \
    CASCADE_LOG_FORMAT=json
EXPOSE 8080
CMD ["python", "-m", "services.api"]
