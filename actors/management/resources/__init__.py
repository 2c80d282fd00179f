"""The management API's resources, one module per resource family (rabbit_mgmt_wm_*).

Each module's docstring names the RabbitMQ modules it mirrors; its ``ROUTES`` (routes.py's
``Route`` records) list the paths it answers with its own ``async def handler(mgmt,
request)`` functions. ``mgmt`` is server.py's ``Management``: ``mgmt.state(request, need)``
logs the user in and fetches the node's definitions and statistics, ``mgmt.ask(op, args)``
asks the metadata actor. Adding a resource: a module here with its ``ROUTES``, registered in
server.py's ``API_RESOURCES`` (docs/management.md, "Where the code is").
"""
