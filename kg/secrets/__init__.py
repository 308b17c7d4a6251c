"""Does a text hold a credential, and of which kind (contract section 10)?

Lives here: the table of credential kinds and their linear-time detection (kinds), which kinds can
match a text at all (prefilter), passwords and secrets judged by where they stand (passwords: names
and values; positions: the places), the shared measures of a value (values), and which texts of a
node, an edge or a progress state are read and how a refusal names them without echoing (fields).
Pure: bytes and strings in, findings out.
May import: nothing of kg (the standard library only), so every layer can ask it.
"""
