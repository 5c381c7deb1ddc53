"""The recipe keys `fit` searches (stdlib only, light: the CLI reads them for its --keep choices)."""

# Each recipe key with the fit.Setting field it sets.
SEARCHED = (
    ("serving.block_size", "block_size"),
    ("serving.drafter_kv_cache_dtype", "drafter_kv_cache_dtype"),
    ("serving.enable_prefix_caching", "enable_prefix_caching"),
    ("serving.num_speculative_tokens", "num_speculative_tokens"),
)
KEEPABLE = tuple(key for key, _name in SEARCHED)
# Held at the recipe's value unless `fit --allow KEY` opens it: prefix caching, whose cache hits a
# user keeps (docs/gate.md) and which buys a fraction of a percent of capacity when traded away.
KEPT_UNLESS_ALLOWED = ("serving.enable_prefix_caching",)
