FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY mm2py ./mm2py
COPY connectors ./connectors
COPY rest_api ./rest_api
RUN pip install --no-cache-dir .
ENTRYPOINT []
CMD ["mm2py", "--help"]
