"""What serves a built image: compose files (written to compose/), Kubernetes manifests, their
checks with the real tools, and the start-time check run on the host. Imports stackbuild.core
and geometry/, never stackbuild.image."""
