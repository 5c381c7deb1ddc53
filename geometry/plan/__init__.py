"""The KV-cache plan as vLLM makes it, simulated (stdlib only).

Takes: ``GeometryInputs`` and the ``Model`` they describe. Gives: ``GeometryReport``
(``report``), made by ``simulate.simulate``: block size, KV groups, pool layout and capacity,
prefix-cache alignment; and requests at once as vLLM's scheduler admits them
(``concurrency``, ``admission``) and the serving limits of a plan (``serving_limits``).
"""
