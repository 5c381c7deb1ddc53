"""Building and publishing an image: plan, render, the engine, registry, pipeline, publish,
attestations and verify. Imports stackbuild.core, geometry/ and overlay/; never stackbuild.serve."""
