"""Contract test classes every backend's test class inherits (Haystack's DocumentStoreBaseTests style)."""
