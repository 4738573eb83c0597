"""Reading a profile: the TOML parsed once into frozen dataclasses (``profile``), typed
access to one table (``fields``), every limit mqlab accepts (``limits``), message sizes
(``sizes``), mixed steps and rolling updates (``roles``), background stress (``background``)
and fault events (``events``) as the profile states them, the profile checked against the
installed plugins and this host (``check``, ``capable``), and the plan: steps and each step's
worker layout (``plan``). Nothing here runs anything.
"""
