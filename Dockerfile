FROM python:3.11-slim
RUN apt-get update && apt-get install -y --no-install-recommends git && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY pyproject.toml README.md ./
COPY api ./api
COPY worker ./worker
RUN pip install --no-cache-dir .
# The data directory exists in the image and belongs to the runtime user: a named volume mounted there is
# initialised from it (owner and mode included), so the API and the workers can write wikis into it.
RUN mkdir -p /data && chown nobody:nogroup /data && chmod 0750 /data
ENV WIKIQ_DATA_DIR=/data
USER nobody
EXPOSE 8080
