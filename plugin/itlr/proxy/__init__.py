"""The query-bar proxy: logical queries typed in Kibana / OpenSearch Dashboards.

`create_proxy_app(connection, field=...)` is an ASGI app; point the UI's cluster URL at it.
"""

from itlr.proxy.app import create_proxy_app
from itlr.proxy.clause import ClauseError, LogicalSearch, find_logical_search
from itlr.proxy.serve import check_exposure, run_proxy, serving

__all__ = [
    "ClauseError",
    "LogicalSearch",
    "check_exposure",
    "create_proxy_app",
    "find_logical_search",
    "run_proxy",
    "serving",
]
