// SPDX-License-Identifier: Apache-2.0
/// @file milp.hpp
/// Umbrella header of the MILP solver (namespace disagmoe::milp), standalone on Eigen:
///  * problem.hpp          Problem builder (bounds, objective, integrality, sparse rows)
///  * simplex.hpp          `solve_lp` (primal, duals, reduced costs, basis) over
///                         dual_simplex.hpp (+ dual_simplex_rows, ratio_test, lp_scaling,
///                         lp_status, basis_factor)
///  * branch_and_bound.hpp `solve(problem, options)` -> Result (status, objective, bound, gap, ...)
///                         with cuts.hpp (GMI + cover_cuts.hpp) and diving.hpp
///  * mps.hpp              MPS reader (fixed/free, gzip with zlib) + mps_writer.hpp
///  * solution_io.hpp      solution files (`name value` lines) and check_solution;
///                         debug_solution.hpp checks every reduction against a known point
///
///     #include <disagmoe/milp/milp.hpp>
///     namespace milp = disagmoe::milp;
///     milp::Problem p;
///     const int a = p.add_var(0, 1, 3.0, milp::VarType::kBinary, "a");
///     const int b = p.add_var(0, 1, 2.0, milp::VarType::kBinary, "b");
///     p.add_row({{a, 1.0}, {b, 1.0}}, 1.0, milp::kInf);   // a + b >= 1
///     const milp::Result r = milp::solve(p);                // optimal, objective 2
#pragma once

#include <disagmoe/milp/branch_and_bound.hpp>
#include <disagmoe/milp/mps.hpp>
#include <disagmoe/milp/problem.hpp>
#include <disagmoe/milp/result.hpp>
#include <disagmoe/milp/simplex.hpp>
#include <disagmoe/milp/solution_io.hpp>
