# Calls "my_library" takes: any call of a function tagged for it.
supports my_library = _(...) [attr match_key="my_library"]
