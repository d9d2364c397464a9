"""The cluster reads both stacks make, written once (itlr.engines.cluster_reads): engine
detection, the stored-script check, the vector field of a mapping, the tie-break key. The pure
readers are fed answers in the shape real clusters give (the root answers are the documented
`GET /` of OpenSearch 2 and Elasticsearch 8, trimmed); the later tests send each read to the real
OpenSearch and Elasticsearch fixtures and read their own answers.

The client layer (itlr.engines.cluster_client): each operation is run once through both faces
(`drive`: the sync one over opensearch-py, the async one over httpx as the proxy sends) against
the real OpenSearch; the async face sends exactly the headers it is given."""

from __future__ import annotations

import asyncio
import http.server
import json
import threading
import uuid
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any, ClassVar

import httpx
import pytest

from itlr.engines.cluster_client import (
    ClientTransport,
    ClusterAnswer,
    ClusterRead,
    ClusterRefused,
    Operation,
    run,
    run_async,
)
from itlr.engines.cluster_reads import (
    DOC_ID,
    NODE_VERSION,
    ROOT,
    MappedVector,
    check_scripts,
    count_coverage,
    count_statistics,
    engine_from_root,
    engine_of,
    index_mappings,
    mapped_vector,
    script_is_ours,
    script_read,
    script_write,
    server_version,
    stored_scripts,
    tiebreak_for,
    vector_dims,
)
from itlr.engines.connection import Connection
from itlr.engines.elasticsearch import ElasticsearchDialect
from itlr.engines.integrity import PipelineMismatch, ScriptMismatch
from itlr.engines.opensearch import OpenSearchDialect
from itlr.engines.painless import StoredScript
from itlr.errors import EngineError
from itlr.hash_guard import PIPELINE, PIPELINE_ID, StoredGuard, stored_guard
from itlr.proxy.caller import HttpxTransport
from itlr.query import parse

URL = "http://127.0.0.1:9200"

OPENSEARCH_ROOT = {
    "name": "node-1",
    "cluster_name": "itlr-test",
    "cluster_uuid": "o7Cw7bS0RjqbuZ3SDdXl5g",
    "version": {
        "distribution": "opensearch",
        "number": "2.19.1",
        "build_type": "tar",
        "lucene_version": "9.12.1",
        "minimum_wire_compatibility_version": "7.10.0",
        "minimum_index_compatibility_version": "7.0.0",
    },
    "tagline": "The OpenSearch Project: https://opensearch.org/",
}
ELASTICSEARCH_ROOT = {
    "name": "node-1",
    "cluster_name": "itlr-test",
    "version": {
        "number": "8.15.3",
        "build_flavor": "default",
        "build_type": "tar",
        "lucene_version": "9.11.1",
    },
    "tagline": "You Know, for Search",
}
OPENSEARCH_VECTOR = {
    "type": "knn_vector",
    "dimension": 384,
    "method": {"engine": "lucene", "space_type": "innerproduct", "name": "hnsw"},
}
ELASTICSEARCH_VECTOR = {"type": "dense_vector", "dims": 384, "index": True, "similarity": "cosine"}


# -- engine detection ----------------------------------------------------------------------


def test_root_read_is_get_slash() -> None:
    assert ClusterRead("GET", "/") == ROOT


def test_engine_from_root_tells_opensearch_and_its_version() -> None:
    assert engine_from_root(URL, OPENSEARCH_ROOT) == ("opensearch", "2.19.1")


def test_engine_from_root_tells_elasticsearch_and_its_version() -> None:
    assert engine_from_root(URL, ELASTICSEARCH_ROOT) == ("elasticsearch", "8.15.3")


@pytest.mark.parametrize("answer", [{"status": "ok"}, "<html>proxy login</html>", None, []])
def test_engine_from_root_refuses_another_server_in_one_line(answer: Any) -> None:
    with pytest.raises(EngineError) as refused:
        engine_from_root(URL, answer)
    message = str(refused.value)
    assert message.startswith(f"{URL} is neither OpenSearch nor Elasticsearch: GET / answered")
    assert message.endswith("check `url`") and "\n" not in message


# -- stored scripts ------------------------------------------------------------------------


@pytest.mark.parametrize("dialect", [OpenSearchDialect(), ElasticsearchDialect()])
def test_stored_scripts_are_the_dialects_score_and_exclude_scripts(dialect: Any) -> None:
    assert stored_scripts(dialect) == (dialect.score_script, dialect.exclude_script)


def test_script_read_and_write_name_the_script_id() -> None:
    script = OpenSearchDialect().score_script
    assert script_read(script) == ClusterRead("GET", f"/_scripts/{script.id}")
    assert script_write(script) == ClusterRead("PUT", f"/_scripts/{script.id}", script.body())


def _answer(script_id: str, source: str) -> dict[str, Any]:
    """A `GET _scripts/<id>` answer as both engines give it."""
    return {"_id": script_id, "found": True, "script": {"lang": "painless", "source": source}}


def test_script_is_ours_when_the_packaged_source_is_stored() -> None:
    script = OpenSearchDialect().score_script
    assert script_is_ours(script, _answer(script.id, script.source), URL) is True


def test_script_is_not_ours_when_nothing_is_stored() -> None:
    assert script_is_ours(OpenSearchDialect().exclude_script, None, URL) is False


@pytest.mark.parametrize(
    "found",
    [
        {"_id": "x", "found": True, "script": {"lang": "painless", "source": "return 1.0;"}},
        {"_id": "x", "found": True, "script": {"lang": "painless"}},
        {"_id": "x", "found": True},
    ],
)
def test_foreign_script_is_refused_naming_itlr_install(found: dict[str, Any]) -> None:
    script = ElasticsearchDialect().score_script
    with pytest.raises(ScriptMismatch) as refused:
        script_is_ours(script, found, URL)
    assert script.id in str(refused.value) and f"itlr install --url {URL}" in str(refused.value)


# -- the vector field of a mapping ---------------------------------------------------------


def test_mapped_vector_reads_opensearchs_knn_vector() -> None:
    properties = {"embedding": OPENSEARCH_VECTOR, "text": {"type": "text"}}
    found = mapped_vector(properties, "embedding")
    assert found == MappedVector("knn_vector", 384) and found.is_vector


def test_mapped_vector_reads_elasticsearchs_dense_vector() -> None:
    found = mapped_vector({"embedding": ELASTICSEARCH_VECTOR}, "embedding")
    assert found == MappedVector("dense_vector", 384) and found.is_vector


@pytest.mark.parametrize(
    "field",
    [
        {"type": "dense_vector", "index": True, "similarity": "cosine"},  # ES 8.11+, no vector yet
        {"type": "knn_vector", "model_id": "trained-ivf"},  # dimension from a trained model
    ],
)
def test_vector_without_a_recorded_dimension_has_none(field: dict[str, Any]) -> None:
    assert vector_dims(field) is None
    assert mapped_vector({"v": field}, "v") == MappedVector(field["type"], None)


def test_other_kinds_of_field_are_not_vectors() -> None:
    properties = {"text": {"type": "text"}, "obj": {"properties": {"a": {"type": "long"}}}}
    assert mapped_vector(properties, "text") == MappedVector("text", None)
    assert mapped_vector(properties, "obj") == MappedVector("object", None)
    assert not mapped_vector(properties, "text").is_vector  # type: ignore[union-attr]
    assert mapped_vector(properties, "absent") is None
    assert vector_dims(None) is None


# -- the tie-break key ---------------------------------------------------------------------


def test_tiebreak_is_doc_id_where_mapped() -> None:
    assert tiebreak_for({DOC_ID: {"type": "keyword"}}, "_id") == DOC_ID


@pytest.mark.parametrize(
    ("dialect", "key"), [(OpenSearchDialect, "_id"), (ElasticsearchDialect, "_doc")]
)
def test_tiebreak_falls_back_to_what_the_engine_sorts_on(dialect: Any, key: str) -> None:
    assert tiebreak_for({"text": {"type": "text"}}, dialect.fallback_tiebreak) == key


def test_tiebreak_without_doc_id_or_fallback_is_none() -> None:
    assert tiebreak_for({}, None) is None


# -- the reads sent to real clusters -------------------------------------------------------


def _check_mapping_reads_on(
    read: Callable[[Operation[Any]], Any], url: str, backend: Any, kind: str, fallback: str
) -> None:
    """The mapping read (`index_mappings`) of a real cluster: the vector field and tie-break
    key of an itlr index, of one made elsewhere, and of both named at once."""
    mappings = read(index_mappings(backend.index_name))
    properties = mappings[backend.index_name]["mappings"]["properties"]
    assert mapped_vector(properties, backend.layout.vector_field) == MappedVector(
        kind, backend.dims
    )
    assert tiebreak_for(properties, fallback) == DOC_ID
    # An index made elsewhere: no doc_id, so the engine's own sort key.
    made = f"itlr-reads-{uuid.uuid4().hex[:8]}"
    body = {"mappings": {"properties": {"body": {"type": "text"}}}}
    assert httpx.put(f"{url}/{made}", json=body, timeout=30).status_code == 200
    try:
        elsewhere = read(index_mappings(made))[made]["mappings"]["properties"]
        assert tiebreak_for(elsewhere, fallback) == fallback
        assert mapped_vector(elsewhere, backend.layout.vector_field) is None
        both = read(index_mappings(f"{made},{backend.index_name}"))
        assert set(both) == {made, backend.index_name}
        assert set(read(index_mappings(made[:-3] + "*"))) == {made}
    finally:
        httpx.delete(f"{url}/{made}")


@pytest.mark.opensearch
def test_mapping_reads_of_a_real_opensearch(drive: Drive, opensearch_demo: Any) -> None:
    _check_mapping_reads_on(drive, opensearch_demo.url, opensearch_demo, "knn_vector", "_id")


@pytest.mark.opensearch
def test_mapping_read_of_a_missing_index_is_refused_with_its_404(drive: Drive) -> None:
    """The sync face raises the client's NotFoundError (the backend words it as for any
    call); the async face the operation's refusal carrying the engine's answer."""
    from opensearchpy import NotFoundError

    with pytest.raises((NotFoundError, ClusterRefused)) as refused:
        drive(index_mappings(f"itlr-absent-{uuid.uuid4().hex[:8]}"))
    if isinstance(refused.value, ClusterRefused):
        assert refused.value.answer.status == 404
        assert str(refused.value).endswith("the cluster answered 404")


@pytest.mark.elasticsearch
def test_mapping_reads_of_a_real_elasticsearch(
    elasticsearch_url: str, elasticsearch_demo: Any
) -> None:
    # The fixture's Elasticsearch (the integ-test build) answers no GET / and runs no Painless:
    # its root and script answers are the literals above. Read through elasticsearch-py.
    client = Connection(elasticsearch_url).elasticsearch()
    try:
        _check_mapping_reads_on(
            lambda operation: run(operation, ClientTransport(client)),
            elasticsearch_url,
            elasticsearch_demo,
            "dense_vector",
            "_doc",
        )
    finally:
        client.close()


# -- the client layer: two faces, one operation --------------------------------------------

Drive = Callable[[Operation[Any]], Any]


@pytest.fixture(params=["sync", "async"])
def drive(request: pytest.FixtureRequest, opensearch_url: str) -> Iterator[Drive]:
    """Run an operation against the real OpenSearch through one face: sync (opensearch-py, the
    backends') or async (httpx with the headers given, the proxy's)."""
    if request.param == "sync":
        client = Connection(opensearch_url).opensearch()
        yield lambda operation: run(operation, ClientTransport(client))
        client.close()
        return

    def through_httpx(operation: Operation[Any]) -> Any:
        async def go() -> Any:
            async with httpx.AsyncClient(base_url=opensearch_url, timeout=30) as client:
                return await run_async(operation, HttpxTransport(client, opensearch_url, 30, {}))

        return asyncio.run(go())

    yield through_httpx


def _root_then_missing_script(answers: list[ClusterAnswer]) -> Operation[str]:
    """Two reads in sequence, the second a 404: what every operation is made of."""
    answers.append((yield ROOT))
    answers.append((yield ClusterRead("GET", f"/_scripts/itlr-absent-{uuid.uuid4().hex[:8]}")))
    return "done"


def _refused_read() -> Operation[None]:
    answer = yield ClusterRead("GET", f"/itlr-absent-{uuid.uuid4().hex[:8]}/_mapping")
    raise ClusterRefused(f"the mapping read was refused ({answer.status})", answer)


@pytest.mark.opensearch
def test_both_faces_send_each_read_and_hand_back_status_and_body(drive: Drive) -> None:
    answers: list[ClusterAnswer] = []
    assert drive(_root_then_missing_script(answers)) == "done"
    root, missing = answers
    assert root.status == 200 and root.ok and root.body["version"]["distribution"] == "opensearch"
    assert missing.status == 404 and not missing.ok and missing.is_json


@pytest.mark.opensearch
def test_sync_face_raises_the_clients_own_error_for_a_refusal(opensearch_url: str) -> None:
    """The backend's `errors()` maps the client's exception: the same line as any other call."""
    from opensearchpy import NotFoundError

    client = Connection(opensearch_url).opensearch()
    try:
        with pytest.raises(NotFoundError):
            run(_refused_read(), ClientTransport(client))
    finally:
        client.close()


@pytest.mark.opensearch
def test_async_face_raises_the_operations_refusal(opensearch_url: str) -> None:
    async def go() -> None:
        async with httpx.AsyncClient(base_url=opensearch_url, timeout=30) as client:
            await run_async(_refused_read(), HttpxTransport(client, opensearch_url, 30, {}))

    with pytest.raises(ClusterRefused, match=r"the mapping read was refused \(404\)") as refused:
        asyncio.run(go())
    assert isinstance(refused.value.answer.source, httpx.Response)


@pytest.mark.elasticsearch
def test_sync_face_over_elasticsearch_py(elasticsearch_url: str) -> None:
    from elasticsearch import NotFoundError

    client = Connection(elasticsearch_url).elasticsearch()
    try:
        made = f"itlr-face-{uuid.uuid4().hex[:8]}"
        put = ClusterRead("PUT", f"/{made}", {"mappings": {"properties": {"t": {"type": "text"}}}})
        transport = ClientTransport(client)
        assert transport.answer(put).ok
        mapping = transport.answer(ClusterRead("GET", f"/{made}/_mapping"))
        assert mapping.status == 200 and mapping.body[made]["mappings"]["properties"]["t"]
        client.indices.delete(index=made)
        with pytest.raises(NotFoundError):
            run(_refused_read(), transport)
    finally:
        client.close()


class _Recorder(http.server.BaseHTTPRequestHandler):
    """A stand-in cluster root that records the headers of each request."""

    seen: ClassVar[list[dict[str, str]]] = []

    def do_GET(self) -> None:
        type(self).seen.append({k.lower(): v for k, v in self.headers.items()})
        body = json.dumps(OPENSEARCH_ROOT).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: Any) -> None:
        pass


@pytest.fixture
def recorder() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    _Recorder.seen = []
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_async_face_sends_exactly_the_credentials_it_is_given(recorder: str) -> None:
    """The proxy's client holds no credentials; a caller's read carries the caller's headers
    and nothing else, and an anonymous caller's carries none (never the proxy's own)."""
    caller = {"authorization": "Basic Y2FsbGVyOnNlY3JldA==", "es-security-runas-user": "ann"}

    async def go(headers: dict[str, str]) -> None:
        async with httpx.AsyncClient(base_url=recorder, timeout=10) as client:
            answer = await HttpxTransport(client, recorder, 10, headers).answer(ROOT)
            assert answer.body == OPENSEARCH_ROOT

    asyncio.run(go(caller))
    asyncio.run(go({}))
    as_caller, anonymous = _Recorder.seen
    identity = ("authorization", "es-security-runas-user", "cookie", "es-secondary-authorization")
    assert {k: v for k, v in as_caller.items() if k in identity} == caller
    assert not any(k in anonymous for k in identity)


def test_sync_face_sends_the_clients_configured_credentials(recorder: str) -> None:
    client = Connection(recorder, user="itlr", password="pw").opensearch()
    try:
        run(_one_root(), ClientTransport(client))
    finally:
        client.close()
    assert _Recorder.seen[0]["authorization"] == "Basic aXRscjpwdw=="


def _one_root() -> Operation[Any]:
    answer = yield ROOT
    return answer.body


# -- the stored-script check, one operation ------------------------------------------------


@pytest.fixture
def scripts(opensearch_url: str) -> Iterator[Any]:
    """A dialect-like pair of stored scripts under ids no other test uses (valid Painless, so
    the engine stores them), deleted afterwards."""
    nonce = uuid.uuid4().hex[:8]
    pair = SimpleNamespace(
        score_script=StoredScript(f"test-score-{nonce}", f"// {nonce}\nreturn 0.5;"),
        exclude_script=StoredScript(f"test-exclude-{nonce}", f"// {nonce}\nreturn false;"),
    )
    yield pair
    for script in (pair.score_script, pair.exclude_script):
        httpx.delete(f"{opensearch_url}/_scripts/{script.id}")


@pytest.mark.opensearch
def test_script_check_stores_missing_scripts_then_finds_them_ours(
    drive: Drive, scripts: Any, opensearch_url: str
) -> None:
    ids = [scripts.score_script.id, scripts.exclude_script.id]
    first = drive(check_scripts(scripts, opensearch_url))
    assert first.stored == ids and first.checked == ids and first.foreign is None
    again = drive(check_scripts(scripts, opensearch_url))
    assert again.stored == [] and again.checked == ids and again.foreign is None


@pytest.mark.opensearch
def test_script_check_keeps_a_foreign_script_and_repair_overwrites_it(
    drive: Drive, scripts: Any, opensearch_url: str
) -> None:
    score = scripts.score_script
    foreign = {"script": {"lang": "painless", "source": "return 1.0;"}}
    assert httpx.put(f"{opensearch_url}/_scripts/{score.id}", json=foreign).status_code == 200
    kept = drive(check_scripts(scripts, opensearch_url))
    assert isinstance(kept.foreign, ScriptMismatch) and kept.foreign.script_id == score.id
    assert f"itlr install --url {opensearch_url}" in str(kept.foreign)
    assert kept.stored == [scripts.exclude_script.id]  # the missing one is stored all the same
    assert httpx.get(f"{opensearch_url}/_scripts/{score.id}").json()["script"]["source"] == (
        "return 1.0;"
    )
    repaired = drive(check_scripts(scripts, opensearch_url, repair=True))
    assert repaired.stored == [score.id] and repaired.foreign is None
    assert drive(check_scripts(scripts, opensearch_url)).foreign is None


@pytest.mark.opensearch
def test_script_check_without_store_leaves_a_missing_script_missing(
    drive: Drive, scripts: Any, opensearch_url: str
) -> None:
    check = drive(check_scripts(scripts, opensearch_url, store=False))
    assert check.checked == [] and check.stored == [] and check.foreign is None
    assert httpx.get(f"{opensearch_url}/_scripts/{scripts.score_script.id}").status_code == 404


@pytest.mark.parametrize(
    ("answers", "message"),
    [
        ([ClusterAnswer(403, {})], "reading itlr's script {id} was refused (403)"),
        ([ClusterAnswer(200, "<html>", False)], "the answer for itlr's script {id} is not JSON"),
        (
            [ClusterAnswer(404, {}), ClusterAnswer(403, {})],
            "storing itlr's script {id} was refused (403)",
        ),
    ],
)
def test_script_check_refuses_an_answer_it_cannot_use_in_one_line(
    answers: list[ClusterAnswer], message: str
) -> None:
    """The refusals each face words for its caller (the proxy's verdict, the backend's error)."""
    dialect = OpenSearchDialect()
    operation = check_scripts(dialect, URL)
    next(operation)
    with pytest.raises(ClusterRefused) as refused:
        for answer in answers:
            operation.send(answer)
    assert str(refused.value) == message.format(id=dialect.score_script.id)


# -- engine detection, one operation -------------------------------------------------------


@pytest.mark.opensearch
def test_engine_of_tells_the_real_opensearch_and_its_version(
    drive: Drive, opensearch_url: str
) -> None:
    engine, version = drive(engine_of(opensearch_url))
    assert engine == "opensearch" and version.count(".") == 2


@pytest.mark.opensearch
def test_server_version_is_the_roots(drive: Drive, opensearch_url: str) -> None:
    assert drive(server_version()) == drive(engine_of(opensearch_url))[1]


@pytest.mark.elasticsearch
def test_server_version_falls_back_to_the_local_node_where_the_root_is_refused(
    elasticsearch_url: str,
) -> None:
    """The fixture's Elasticsearch (integ-test build) refuses GET /: both faces read the
    version from the local node's info."""
    assert httpx.get(f"{elasticsearch_url}/", timeout=30).status_code >= 400
    client = Connection(elasticsearch_url).elasticsearch()
    try:
        synced = run(server_version(), ClientTransport(client))
    finally:
        client.close()

    async def go() -> Any:
        async with httpx.AsyncClient(base_url=elasticsearch_url, timeout=30) as http:
            return await run_async(
                server_version(), HttpxTransport(http, elasticsearch_url, 30, {})
            )

    assert synced is not None and synced.count(".") == 2 and asyncio.run(go()) == synced


def test_server_version_is_none_when_the_node_info_is_refused_too() -> None:
    operation = server_version()
    assert next(operation) == ROOT
    assert operation.send(ClusterAnswer(401, {})) == NODE_VERSION
    with pytest.raises(StopIteration) as done:
        operation.send(ClusterAnswer(403, {}))
    assert done.value.value is None


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (ClusterAnswer(401, {"error": "unauthorized"}), f"{URL} answered 401 to GET /"),
        (
            ClusterAnswer(200, "<html>proxy login</html>", False),
            f"{URL} is neither OpenSearch nor Elasticsearch: GET / answered an HTML page",
        ),
    ],
)
def test_engine_of_refuses_a_root_it_cannot_use(answer: ClusterAnswer, message: str) -> None:
    """Each face words the refusal for its caller: the status, or engine_from_root's line
    (a ClusterRefused either way, so a face can tell the two apart by `answer.ok`)."""
    operation = engine_of(URL)
    assert next(operation) == ROOT
    with pytest.raises(ClusterRefused) as refused:
        operation.send(answer)
    assert str(refused.value).startswith(message) and refused.value.answer is answer


# -- counts: coverage and token statistics, one operation each -----------------------------


@pytest.mark.opensearch
def test_count_coverage_of_the_demo_index(drive: Drive, opensearch_demo: Any) -> None:
    layout, name = opensearch_demo.layout, opensearch_demo.index_name
    counted = drive(count_coverage(name, layout.vector_field, layout.text_field))
    assert counted.index == name and counted.total == opensearch_demo.count() > 0
    assert counted.without_vector == 0 and counted.without_text == 0
    # The proxy's count (no follower state read) counts the same documents.
    plain = drive(count_coverage(name, layout.vector_field, layout.text_field, follow_state=False))
    assert (plain.total, plain.without_vector) == (counted.total, counted.without_vector)


@pytest.mark.opensearch
def test_count_statistics_of_the_demo_index(drive: Drive, opensearch_demo: Any) -> None:
    query = parse('"vitamin D benefits" AND NOT "bone health"')
    counted = drive(count_statistics(opensearch_demo.index_name, query))
    assert counted.documents == opensearch_demo.count() and counted.total_length > 0
    assert set(counted.df) and all(0 <= df <= counted.documents for df in counted.df.values())


@pytest.mark.parametrize(
    ("operation", "message"),
    [
        (
            count_coverage("logs", "embedding", "text"),
            "cannot count the documents of 'logs' without a vector: the cluster answered 403",
        ),
        (
            count_statistics("logs", parse("a AND b")),
            "cannot count the token statistics of 'logs' that hybrid truths need: the cluster "
            "answered 403",
        ),
    ],
)
def test_a_refused_count_is_one_line_naming_what_was_counted(
    operation: Operation[Any], message: str
) -> None:
    refusal = {"error": {"root_cause": [{"type": "security_exception", "reason": "no"}]}}
    next(operation)
    with pytest.raises(ClusterRefused) as refused:
        operation.send(ClusterAnswer(403, refusal))
    assert str(refused.value) == f"{message} (security_exception: no)"


def test_statistics_without_aggregations_are_refused_in_one_line() -> None:
    operation = count_statistics("logs", parse("a AND b"))
    next(operation)
    with pytest.raises(ClusterRefused, match="the cluster's answer has no statistics"):
        operation.send(ClusterAnswer(200, {"hits": {}}))


@pytest.mark.opensearch
def test_guard_check_stores_a_missing_pipeline_only_when_asked_and_refuses_a_foreign_one(
    drive: Drive, opensearch_url: str
) -> None:
    """The hash-guard check the backends, the follower and the proxy's watch all make: one
    operation (itlr.hash_guard.stored_guard) through either face."""
    path = f"{opensearch_url}/_ingest/pipeline/{PIPELINE_ID}"
    existed = httpx.get(path, timeout=30).status_code == 200  # other tests' indexes may use it
    httpx.delete(path, timeout=30)
    try:
        assert drive(stored_guard(opensearch_url, restore=False)) == StoredGuard(present=False)
        assert httpx.get(path, timeout=30).status_code == 404  # left missing when not asked
        assert drive(stored_guard(opensearch_url, restore=True)).restored
        assert drive(stored_guard(opensearch_url, restore=False)) == StoredGuard(present=True)
        emptied = {"description": "someone else's", "processors": []}
        assert httpx.put(path, json=emptied, timeout=30).status_code == 200
        with pytest.raises(PipelineMismatch, match=PIPELINE_ID):
            drive(stored_guard(opensearch_url, restore=True))
    finally:
        if existed:
            httpx.put(path, json=PIPELINE, timeout=30)
        else:
            httpx.delete(path, timeout=30)
