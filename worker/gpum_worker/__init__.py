"""gpu-market worker agent."""
