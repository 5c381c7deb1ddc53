"""What every host-side stage shares: the recipe and its schema, errors and exit codes, image
references and names, the lock, files written whole, labels, the `vllm serve` argv and its
roles, the recipe's gate run and the build report's location. Imports only geometry/ below it."""
