"""What-if: how the placements of a cluster change between two policy sets (`policyd diff`)."""
