"""The recipe keys `fit` searches (stdlib only, light: the CLI reads them for its --keep choices)."""

# Each recipe key with the fit.Setting field it sets.
SEARCHED = (
    ("serving.block_size", "block_size"),
    ("serving.drafter_kv_cache_dtype", "drafter_kv_cache_dtype"),
    ("serving.enable_prefix_caching", "enable_prefix_caching"),
    ("serving.num_speculative_tokens", "num_speculative_tokens"),
)
KEEPABLE = tuple(key for key, _name in SEARCHED)
