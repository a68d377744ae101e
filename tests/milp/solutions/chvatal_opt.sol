# chvatal_max.mps optimum 13
A 2
B 0
C 1
