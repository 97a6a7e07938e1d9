FROM python:3.11-slim
RUN apt-get update && apt-get install -y --no-install-recommends git && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY pyproject.toml README.md ./
COPY api ./api
COPY worker ./worker
RUN pip install --no-cache-dir .
USER nobody
EXPOSE 8080
