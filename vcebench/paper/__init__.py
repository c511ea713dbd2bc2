"""Paper reproduction at paper size: calls per CF (``nfe``), FLOPs per CF (``scale``), GPU timing
(``timing``) and the numbers the papers report (``numbers``)."""
