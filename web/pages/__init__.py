"""One module per console area: its controller (thin: read the form -> the control
plane's service -> the fragment to swap), templates under templates/<area>/."""
