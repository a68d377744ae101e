NAME ranges
OBJSENSE MIN
ROWS
 N cost
 G lim
 E eq
 L cap
COLUMNS
 x cost 1 lim 1
 x eq 1
 y cost 2 lim 1
 y cap 1
 z cost -1 eq -1
 z cap 1
RHS
 lim 2 eq 0.5
 cap 4 cost -10
RANGES
 lim 3 eq -1
BOUNDS
 FR bnd x
 MI bnd z
 UP bnd z 3
 PL bnd y
 FX bnd y 1
ENDATA
