# violates C1 (2a + 3b + c <= 5): activity 7
A 2
B 1
C 0
