"""Kubernetes manifests that serve a built image: a Deployment (one machine) or a
LeaderWorkerSet (a tensor-parallel group across machines), with a Service.

``k8s`` builds the manifests as plain data and their YAML text, ``validate``
checks them offline (kubernetes-validate's schemas for core objects, a JSON schema
for the LeaderWorkerSet's own fields).
"""
