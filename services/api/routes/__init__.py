"""api route modules, discovered by :func:`services.api.app.create_app`.

Each module defines ``routes = web.RouteTableDef()`` and decorates handlers
with it (plus :func:`services.api.http.doc` for OpenAPI details). Optional:
``setup(app)`` and ``openapi: list[dict]``. See ``health.py`` for an example.
"""
