# mm2py worker image: `mm2py run` with the in-process runtime; Java is included so that
# `--runtime spark` (PySpark's embedded local mode) works too.
FROM python:3.11-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY pyproject.toml README.md ./
COPY mm2py ./mm2py
COPY connectors ./connectors
COPY rest_api ./rest_api
RUN pip install --no-cache-dir .
EXPOSE 8083 9108
ENTRYPOINT []
CMD ["mm2py", "--help"]
