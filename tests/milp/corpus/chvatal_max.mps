* Chvatal, Linear Programming (1983), ch. 2: max 5a + 4b + 3c, optimum 13 at (2, 0, 1)
NAME          CHVATAL
OBJSENSE
    MAX
ROWS
 N  PROFIT
 L  C1
 L  C2
 L  C3
COLUMNS
    MARKER    'MARKER'     'INTORG'
    A         PROFIT       5.0   C1           2.0
    A         C2           4.0   C3           3.0
    B         PROFIT       4.0   C1           3.0
    B         C2           1.0   C3           4.0
    C         PROFIT       3.0   C1           1.0
    C         C2           2.0   C3           2.0
    MARKER    'MARKER'     'INTEND'
RHS
    RHS       C1           5.0   C2          11.0
    RHS       C3           8.0
BOUNDS
 UP BND       A            5.0
 UP BND       B            5.0
 UP BND       C            5.0
ENDATA
