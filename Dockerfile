# The itlr query-bar proxy (and CLI) as an image; docker-compose.yml builds it.
# The bundled model comes from PyPI with the package: nothing is fetched at run time.
FROM python:3.11-slim
WORKDIR /app
# What the wheel build reads: the project, its build hook (hatch_build.py packs the model in).
COPY pyproject.toml README.md hatch_build.py ./
COPY plugin plugin
COPY mappings mappings
COPY scripts scripts
RUN pip install --no-cache-dir .
ENV HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
EXPOSE 9200
ENTRYPOINT ["itlr", "serve", "--proxy"]
