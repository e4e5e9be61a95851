"""The chat pipeline: prompt assembly, citations, confidence, rate limits, SSE events."""
