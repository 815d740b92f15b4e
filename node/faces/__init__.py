"""The faces: HTTP (and Flight SQL, the gateway, the web page), the CLI and the daemon. They parse, call
``node.core.Node`` and render; nothing below imports them."""
