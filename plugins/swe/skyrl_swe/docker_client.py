"""The Docker engine client the docker runtime, the image builder and ``skyrl swe build-images`` share: a leaf
module (the ``docker`` SDK only, imported when first asked for)."""

from __future__ import annotations


def docker_client():
    """A docker SDK client, or RuntimeError saying why none is available."""
    try:
        import docker
    except ImportError as exc:  # a dependency of this plugin, but say so clearly
        raise RuntimeError(f"the docker runtime needs the 'docker' package: {exc}") from None
    try:
        client = docker.from_env(timeout=120)
        client.ping()
    except Exception as exc:
        raise RuntimeError(f"no Docker engine answers ({type(exc).__name__}: {exc}); start dockerd (or run "
                           f"scripts/ensure-docker) or use runtime type swe_sandbox") from None
    return client
