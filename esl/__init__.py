"""ESCHER scheduling libraries (ESLs): ready placement policies over ephemeral resources."""
