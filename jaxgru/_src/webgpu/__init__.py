"""The ``wgsl`` backend below the JAX callback: WGSL kernels run through wgpu on numpy arrays.

Modules: ``kernels`` (the forward entry point), ``backward`` (the backward entry point),
``callback`` (the JAX host callbacks of both), ``runtime`` (adapter, device, lock, pipelines),
``plan`` (shapes, variant choice, chunking), ``host`` (host-side conversions), ``caches``
(buffer pool, schedule-table cache), ``shaders`` (WGSL sources), ``counters``.
"""
