"""The ``wgsl`` backend below the JAX callback: WGSL kernels run through wgpu on numpy arrays.

Modules: ``kernels`` (the forward entry point), ``tangent`` and ``backward`` (the tangent map's
and the backward's entry points), ``callback`` (the JAX host callbacks of all three), ``runtime``
(adapter, device, lock, pipelines), ``plan`` (shapes, variant choice, tiling, chunking),
``plan_report`` (the plan's figures as a table), ``host`` (host-side conversions), ``caches``
(buffer pool, schedule-table cache), ``shaders`` (WGSL sources), ``counters``.
"""
