"""The store over HTTP: ``client`` (``HttpStore``, what ``open_store("http://...")`` returns), ``server`` (``tether
store serve``), and ``_wire``, the JSON both speak."""
