"""bloom: Bloom filters, fingerprints and the bit-sliced routing index."""
