"""The plugin SDK: what a transport plugin may import beside :mod:`mqlab.transport` and
:mod:`mqlab.errors`, and nothing driver-specific. URLs and default ports (``urls``), the
AMQP 0-9-1 topology every AMQP plugin shares (``amqp``), connecting to the first URL that
answers (``connect``), the waiting-call table (``pending``), blocking libraries in threads
(``threads``), what a client works out once per target (``targets``), and the
reference-loop contract each plugin ships for ``mqlab ceiling`` (``reference``). The core
imports these too; they import nothing above them.
"""
