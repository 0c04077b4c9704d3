# mm2py worker image: `mm2py run` with the in-process runtime; Java is included so that
# `--runtime spark` (PySpark's embedded local mode) works too. gcc and liblz4-dev build the compiled
# hot path (mm2py.protocol._native) and are removed again; liblz4-1 stays for it.
FROM python:3.11-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless liblz4-1 \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY pyproject.toml setup.py README.md ./
COPY mm2py ./mm2py
COPY connectors ./connectors
COPY rest_api ./rest_api
RUN apt-get update \
 && apt-get install -y --no-install-recommends gcc libc6-dev liblz4-dev \
 && pip install --no-cache-dir '.[spark]' \
 && (cd / && python -c 'from mm2py.protocol import native; assert native.AVAILABLE') \
 && apt-get purge -y gcc libc6-dev liblz4-dev && apt-get autoremove -y \
 && rm -rf /var/lib/apt/lists/*
EXPOSE 8083 9108
ENTRYPOINT []
CMD ["mm2py", "--help"]
