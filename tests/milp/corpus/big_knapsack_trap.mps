NAME big-knapsack-1
ROWS
 N  OBJ
 L  r0
 L  r1
COLUMNS
    M0  'MARKER'  'INTORG'
    x0  OBJ  -3
    x0  r1  200091.758
    x1  OBJ  -39
    x1  r0  964989
    x1  r1  927190.28000000003
    x2  OBJ  -6
    x2  r1  483064.41600000003
    x3  OBJ  -26
    x3  r0  710786.93099999998
    x3  r1  419424
    M1  'MARKER'  'INTEND'
    x4  OBJ  -2
    x4  r0  900000
RHS
    RHS  r0  4349130
    RHS  r1  2029770.409
BOUNDS
 BV BND  x0
 BV BND  x1
 BV BND  x2
 BV BND  x3
 UP BND  x4  8
ENDATA
