"""Stand-in for ``vllm.config.ModelConfig``: the attributes vLLM's planning reads."""

from __future__ import annotations


class ModelConfigStandIn:
    """Stand-in for vllm.config.ModelConfig with what the planning reads."""

    def __init__(
        self,
        hf,
        arch: str,
        dtype,
        max_model_len: int,
        use_mla: bool,
        head_size: int,
        total_kv_heads: int,
        is_hybrid: bool = True,
    ):
        self.hf_config = hf
        self.hf_text_config = hf
        self.architecture = arch
        self.architectures = [arch]
        self.dtype = dtype
        self.max_model_len = max_model_len
        self.use_mla = use_mla
        self.is_hybrid = is_hybrid
        self.is_mm_prefix_lm = False
        self.is_multimodal_model = False
        self.is_diffusion = False
        self._head_size = head_size
        self._total_kv = total_kv_heads
        self.model = "glm53-geometry-oracle"
        self.rswa_window = None
        self.model_impl = "auto"
        self.runner_type = "generate"
        self.convert_type = "none"

    def get_head_size(self) -> int:
        return self._head_size

    def get_num_kv_heads(self, parallel_config) -> int:
        if self.use_mla:
            return 1
        return max(1, self._total_kv // parallel_config.tensor_parallel_size)

    def get_num_attention_heads(self, parallel_config) -> int:
        return self.hf_text_config.num_attention_heads // parallel_config.tensor_parallel_size
