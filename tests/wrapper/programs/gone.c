/* gone.c - a shared library that uses_gone.c links against, deleted before the tests run it. */
int gone_value(int x) { return x + 1; }
