"""The namespace of the labels the build sets on an image and compose sets on its service."""

LABEL_NS = "io.github.glm53"
