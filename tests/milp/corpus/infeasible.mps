NAME infeasible
ROWS
 N obj
 E parity
COLUMNS
 MARKER 'MARKER' 'INTORG'
 x obj 1 parity 2
 MARKER 'MARKER' 'INTEND'
RHS
 rhs parity 1
BOUNDS
 LI bnd x -3
 UI bnd x 3
ENDATA
