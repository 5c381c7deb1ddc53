"""The KV-cache vocabulary, below everything that plans (stdlib only).

Takes: nothing of the other stages. Gives: the attention backends vLLM chooses between and their
kernel blocks (``backends``), one frozen dataclass per KV spec kind with its page size
(``kv_spec``), and the drafter's attention backend as vLLM picks it (``drafter_backend``).
"""
