# mm2py images, two targets of one multi-stage build (docker-compose.yml builds both):
#
#   lean  (default)  `mm2py run` with the in-process runtime: no Java, no pyspark, no compiler
#                    docker build -t mm2py:lean .
#   spark            lean's contents plus a Java runtime and pyspark (the `spark` extra): the
#                    driver of `mm2py run --runtime spark`, and the Spark standalone master, worker
#                    and executors (so that executors import the same mm2py)
#                    docker build --target spark -t mm2py:spark .
#
# The compiled hot path (mm2py.protocol._native) is built into a wheel in the `build` stage, the
# only one with a C compiler and liblz4's headers; the runtime stages install that wheel and keep
# only liblz4's shared library. Layers are ordered so that a change to mm2py's sources rebuilds the
# wheel and the two small layers installing it, not the dependencies (pyspark is ~470 MB).
ARG PYTHON_IMAGE=python:3.11-slim

# --- the wheel of mm2py, compiled path included ------------------------------------------------
FROM ${PYTHON_IMAGE} AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends gcc libc6-dev liblz4-dev \
 && apt-get clean && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml setup.py README.md ./
COPY mm2py ./mm2py
COPY connectors ./connectors
COPY rest_api ./rest_api
# setup.py makes the extension optional; here a wheel without it is an error
RUN pip wheel --no-cache-dir --disable-pip-version-check --no-deps --wheel-dir /wheels . \
 && { python -m zipfile -l /wheels/mm2py-*.whl | grep -qE 'mm2py/protocol/_native\.[^ ]*\.so' \
      || { echo "the mm2py wheel has no compiled path" >&2; exit 1; }; }

# --- mm2py's dependencies, read from pyproject.toml (rebuilt only when it changes) -------------
FROM ${PYTHON_IMAGE} AS requirements
WORKDIR /src
COPY pyproject.toml ./
RUN python -c "import tomllib; project = tomllib.load(open('pyproject.toml', 'rb'))['project']; \
open('base.txt', 'w').write('\n'.join(project['dependencies']) + '\n'); \
open('spark.txt', 'w').write('\n'.join(project['optional-dependencies']['spark']) + '\n')"

# --- what both runtime images share: liblz4, the dependencies, an unprivileged user ------------
FROM ${PYTHON_IMAGE} AS runtime
# liblz4's shared library for the compiled path (Debian's apt needs it too: usually already there)
RUN dpkg -s liblz4-1 > /dev/null 2>&1 || { apt-get update \
 && apt-get install -y --no-install-recommends liblz4-1 \
 && apt-get clean && rm -rf /var/lib/apt/lists/*; }
COPY --from=requirements /src/base.txt /tmp/requirements.txt
RUN pip install --no-cache-dir --disable-pip-version-check -r /tmp/requirements.txt \
 && rm /tmp/requirements.txt
# /state and /certs: a named volume mounted there first takes the directory's owner (the REST
# API's development certificate is written into /certs by the compose setup's rest-certs service)
RUN useradd --create-home --uid 1000 mm2py \
 && mkdir /state /certs && chown mm2py:mm2py /state /certs
WORKDIR /home/mm2py
ENV PYTHONUNBUFFERED=1
EXPOSE 8083 9108
ENTRYPOINT []
CMD ["mm2py", "--help"]

# --- spark: + Java and pyspark -----------------------------------------------------------------
FROM runtime AS spark
# default-jre-headless: the Debian release's Java (17 on bookworm, 21 on trixie; Spark 4 runs on both)
RUN apt-get update \
 && mkdir -p /usr/share/man/man1 \
 && apt-get install -y --no-install-recommends default-jre-headless \
 && apt-get clean && rm -rf /var/lib/apt/lists/*
COPY --from=requirements /src/spark.txt /tmp/requirements.txt
RUN pip install --no-cache-dir --disable-pip-version-check -r /tmp/requirements.txt \
 && rm /tmp/requirements.txt
COPY --from=build /wheels /tmp/wheels
RUN pip install --no-cache-dir --disable-pip-version-check --no-deps /tmp/wheels/mm2py-*.whl \
 && rm -rf /tmp/wheels \
 && pip check \
 && python -c 'from mm2py.protocol import native; assert native.AVAILABLE, native.unavailable()' \
 && spark-class org.apache.spark.deploy.master.Master --help 2>&1 | grep -q 'Usage: Master'
# Spark's master and worker are started from the installed pyspark (bin/spark-class), no download
EXPOSE 7077 8080 8081
USER mm2py

# --- lean (the default target, last) -----------------------------------------------------------
FROM runtime AS lean
COPY --from=build /wheels /tmp/wheels
RUN pip install --no-cache-dir --disable-pip-version-check --no-deps /tmp/wheels/mm2py-*.whl \
 && rm -rf /tmp/wheels \
 && pip check \
 && python -c 'from mm2py.protocol import native; assert native.AVAILABLE, native.unavailable()'
USER mm2py
