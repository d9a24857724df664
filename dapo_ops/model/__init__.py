"""The facts dapo-ops works from, typed and declared once (pure: reads no node)."""
