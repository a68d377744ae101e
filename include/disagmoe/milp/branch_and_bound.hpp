// SPDX-License-Identifier: Apache-2.0
/// @file branch_and_bound.hpp
/// LP-based branch and bound over the dual simplex (Land and Doig 1960), with the usual
/// components of a modern MIP solver (Achterberg, "Constraint integer programming", PhD
/// thesis, TU Berlin 2007, ch. 5-6): best-bound node selection with depth-first plunges,
/// pseudo-cost branching (initialised by strong branching, most fractional as the last
/// resort), reduced-cost bound tightening against the incumbent, simple rounding,
/// fractional and coefficient diving (diving.hpp) besides the plunges,
/// warm-started dual simplex re-solves from the parent's basis, objective cutoff inside
/// the LP, and root Gomory mixed-integer and extended knapsack cover cuts (cuts.hpp),
/// after presolve (presolve.hpp, which `solve` runs first).
/// A node whose LP point is integral but not feasible (a badly scaled row) is re-solved
/// and, if need be, split, never dropped (resolve_integral_node). With
/// Options::debug_solution every reduction is checked against a known point
/// (debug_solution.hpp).
/// Deterministic: no randomness, no threads; only the limits depend on the clock.
#pragma once

#include <disagmoe/milp/cuts.hpp>
#include <disagmoe/milp/debug_solution.hpp>
#include <disagmoe/milp/diving.hpp>
#include <disagmoe/milp/presolve.hpp>
#include <disagmoe/milp/problem.hpp>
#include <disagmoe/milp/result.hpp>
#include <disagmoe/milp/simplex.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iostream>
#include <memory>
#include <queue>
#include <vector>

namespace disagmoe::milp {

namespace detail {

struct BoundChange {
  int var;
  double lb, ub;
};

struct Node {
  std::shared_ptr<const Node> parent;
  std::vector<BoundChange> changes;  // tightenings relative to the parent
  std::shared_ptr<const std::vector<BasisStatus>> basis;  // parent's final basis
  double bound = -kInf;  // valid lower bound (internal minimisation)
  long id = 0;
  int depth = 0;
  int branch_var = -1;
  bool branch_up = false;
  double branch_dist = 0;  // distance the branching moved the variable
  bool debug_in = false;   // its box contains Options::debug_solution
};
using NodePtr = std::shared_ptr<Node>;

struct NodeOrder {  // best bound first, older node first on ties (deterministic)
  bool operator()(const NodePtr& a, const NodePtr& b) const {
    if (a->bound != b->bound) return a->bound > b->bound;
    return a->id > b->id;
  }
};

class BranchAndBound {
 public:
  using Clock = std::chrono::steady_clock;

  BranchAndBound(const Problem& p, const Options& o)
      : p_(p), opt_(o), lp_(p), n_(p.num_vars()), start_(Clock::now()) {
    sign_ = p.sense() == Sense::kMaximize ? -1.0 : 1.0;
    deadline_ = std::isfinite(o.time_limit)
        ? start_ + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.time_limit))
        : Clock::time_point::max();
    lb0_ = p.lbs();
    ub0_ = p.ubs();
    integral_obj_ = true;
    for (int j = 0; j < n_; ++j) {
      if (p.is_integer(j)) {
        ints_.push_back(j);
        lb0_[j] = std::ceil(lb0_[j] - o.integrality_tol);
        ub0_[j] = std::floor(ub0_[j] + o.integrality_tol);
        if (p.obj(j) != std::round(p.obj(j))) integral_obj_ = false;
      } else if (p.obj(j) != 0.0) {
        integral_obj_ = false;
      }
    }
    pc_sum_.assign(2 * n_, 0.0);
    pc_cnt_.assign(2 * n_, 0);
    build_locks();
    if (o.debug_solution != nullptr) {
      dbg_ = std::make_unique<DebugSolution>(p, *o.debug_solution, o.feasibility_tol);
      for (int j : ints_)
        dbg_->check_bounds(j, lb0_[j], ub0_[j], [] { return std::string("rounding of integer bounds"); });
    }
  }

  Result run() {
    Result res;
    for (int j : ints_) {
      if (lb0_[j] > ub0_[j]) return finish(res, Status::kInfeasible);
    }
    for (int j = 0; j < n_; ++j) lp_.set_col_bounds(j, lb0_[j], ub0_[j]);
    cur_lb_ = lb0_;
    cur_ub_ = ub0_;
    // Root.
    LpStatus s = lp_.solve(kInf, deadline_);
    if (s == LpStatus::kTimeLimit) return finish(res, Status::kTimeLimit);
    if (dbg_ && s == LpStatus::kInfeasible) dbg_->fail("root LP reported infeasible");
    if (s == LpStatus::kInfeasible) return finish(res, Status::kInfeasible);
    if (dbg_ && s == LpStatus::kOptimal)
      dbg_->check_lower_bound(lp_.objective(), [] { return std::string("root LP (before cuts)"); });
    if (s == LpStatus::kUnbounded) return finish(res, Status::kUnbounded);
    if (s == LpStatus::kIterationLimit) throw SolverError("milp: root LP hit the iteration limit");
    res.root_bound = sign_ * lp_.objective() + p_.objective_offset();
    if (opt_.verbose) std::cerr << "milp: root LP bound " << res.root_bound << "\n";
    if (opt_.cut_rounds > 0 && !ints_.empty()) {
      GomoryCuts cuts(p_, lp_, ints_, dbg_.get(), opt_.flow_cover_cuts);
      s = cuts.run(opt_.cut_rounds, deadline_);
      res.cuts = cuts.counts();
      if (s == LpStatus::kTimeLimit) return finish(res, Status::kTimeLimit);
      if (s == LpStatus::kInfeasible) return finish(res, Status::kInfeasible);
    }
    root_bound_ = lp_.objective();
    res.root_bound_cuts = sign_ * root_bound_ + p_.objective_offset();
    if (opt_.verbose)
      std::cerr << "milp: bound after cuts " << res.root_bound_cuts << " (" << lp_.num_rows() - p_.num_rows()
                << " cuts in the LP; added " << res.cuts.gmi << " GMI, " << res.cuts.cover << " cover, " << res.cuts.mir
                << " c-MIR, " << res.cuts.flow_cover << " flow cover), " << seconds() << " s\n";
    save_root_reduced_costs();
    run_dives();
    auto root = std::make_shared<Node>();
    root->bound = root_bound_;
    root->id = next_id_++;
    root->debug_in = dbg_ != nullptr;
    process_tree(root, true);
    if (stopped_ != Status::kOptimal) return finish(res, stopped_);
    return finish(res, Status::kOptimal);
  }

 private:
  double seconds() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }

  // The debug solution is checked while it is strictly better than the incumbent (then
  // every reduction must keep it); a null pointer when off or no longer needed.
  const DebugSolution* debug() const {
    if (!dbg_) return nullptr;
    return dbg_->better_than(cutoff()) ? dbg_.get() : nullptr;
  }
  // The debug checker when the node contains the debug solution and it is still active.
  const DebugSolution* debug(const Node& node) const { return node.debug_in ? debug() : nullptr; }
  static std::string node_name(const Node& n) {
    return "node " + std::to_string(n.id) + " (depth " + std::to_string(n.depth) + ")";
  }

  // Objective value a node must beat to be worth exploring (internal minimisation).
  double cutoff() const {
    if (!has_inc_) return kInf;
    double margin = std::max(opt_.abs_gap, opt_.rel_gap * std::abs(inc_obj_ + sign_ * p_.objective_offset()));
    if (integral_obj_) margin = std::max(margin, 1.0 - 1e-6);
    return inc_obj_ - margin;
  }

  void build_locks() {
    // A row locks x_j downwards if decreasing x_j can violate it (Achterberg §3.3.3).
    down_locks_.assign(n_, 0);
    up_locks_.assign(n_, 0);
    for (int i = 0; i < p_.num_rows(); ++i) {
      const RowView r = p_.row(i);
      const bool lo = p_.row_lo(i) > -kInf, hi = p_.row_hi(i) < kInf;
      for (std::size_t k = 0; k < r.index.size(); ++k) {
        const bool pos = r.value[k] > 0;
        if ((pos && lo) || (!pos && hi)) ++down_locks_[r.index[k]];
        if ((pos && hi) || (!pos && lo)) ++up_locks_[r.index[k]];
      }
    }
  }

  void save_root_reduced_costs() {
    root_d_.assign(n_, 0.0);
    for (int j : ints_)
      if (!lp_.is_basic(j)) root_d_[j] = lp_.reduced_cost(j);
  }

  // Global reduced-cost fixing from the root LP (Achterberg §7.7): x_j moving d units
  // away from its root bound raises the objective by at least |rc_j| per unit.
  void root_reduced_cost_fixing() {
    const double gap = cutoff() - root_bound_;
    if (!(gap < kInf)) return;
    const DebugSolution* dbg = debug();
    for (int j : ints_) {
      const double d = root_d_[j];
      if (d > 1e-7) {
        const double newub = lb0_[j] + std::floor(gap / d + 1e-9);
        if (newub < ub0_[j]) ub0_[j] = std::max(newub, lb0_[j]);
      } else if (d < -1e-7) {
        const double newlb = ub0_[j] - std::floor(gap / -d + 1e-9);
        if (newlb > lb0_[j]) lb0_[j] = std::min(newlb, ub0_[j]);
      }
      if (dbg != nullptr)
        dbg->check_bounds(j, lb0_[j], ub0_[j], [&] {
          return "root reduced-cost fixing (reduced cost " + DebugSolution::num(d) + ", root bound " +
                 DebugSolution::num(root_bound_) + ", cutoff " + DebugSolution::num(cutoff()) + ")";
        });
    }
  }

  bool try_incumbent(std::vector<double> x) {
    for (int j : ints_) x[j] = std::round(x[j]);
    if (p_.max_scaled_violation(x, opt_.feasibility_tol) > opt_.feasibility_tol) return false;
    const double obj = sign_ * (p_.evaluate(x) - p_.objective_offset());
    if (has_inc_ && obj >= inc_obj_) return false;
    has_inc_ = true;
    inc_obj_ = obj;
    inc_x_ = std::move(x);
    if (opt_.verbose)
      std::cerr << "milp: incumbent " << p_.evaluate(inc_x_) << " after " << nodes_ << " nodes, "
                << seconds() << " s\n";
    if (opt_.on_incumbent) opt_.on_incumbent({p_.evaluate(inc_x_), inc_x_, nodes_, seconds()});
    root_reduced_cost_fixing();
    return true;
  }

  // Simple rounding (Achterberg §9.1.1): round each fractional variable in a direction
  // in which no row locks it; succeeds only if every one can be rounded so.
  void simple_rounding(const std::vector<double>& x) {
    std::vector<double> y = x;
    for (int j : ints_) {
      const double f = y[j] - std::floor(y[j]);
      if (f <= opt_.integrality_tol || f >= 1 - opt_.integrality_tol) continue;
      if (down_locks_[j] == 0) y[j] = std::floor(y[j]);
      else if (up_locks_[j] == 0) y[j] = std::ceil(y[j]);
      else return;
    }
    try_incumbent(std::move(y));
  }

  // Loads the node's bounds into the LP; false when its box is empty (then the node
  // holds no point: the LP is left unchanged). Clamping an empty box to lb = ub, as
  // this did before, gave the LP a point the node does not contain.
  bool apply_node_bounds(const Node& node) {
    std::vector<double> lb = lb0_, ub = ub0_;
    for (const Node* a = &node; a != nullptr; a = a->parent.get())
      for (const BoundChange& c : a->changes) {
        lb[c.var] = std::max(lb[c.var], c.lb);
        ub[c.var] = std::min(ub[c.var], c.ub);
      }
    for (int j : ints_)
      if (lb[j] > ub[j]) return false;
    for (int j : ints_) {
      if (lb[j] != cur_lb_[j] || ub[j] != cur_ub_[j]) {
        lp_.set_col_bounds(j, lb[j], ub[j]);
        cur_lb_[j] = lb[j];
        cur_ub_[j] = ub[j];
      }
    }
    return true;
  }

  // Whether branching on x_j = v gives two non-empty children in the node's box. An
  // LP value outside the box by up to the LP's tolerance (0.999998 with bounds [1, 1])
  // looks fractional but is not: branching on it made one child empty and the other
  // equal to the node, and the tree descended forever.
  bool branchable(int j, double v) const {
    const double f = v - std::floor(v);
    if (f <= opt_.integrality_tol || f >= 1 - opt_.integrality_tol) return false;
    return std::floor(v) >= cur_lb_[j] && std::ceil(v) <= cur_ub_[j];
  }

  double pseudo_cost(int j, bool up) const {
    const int k = 2 * j + (up ? 1 : 0);
    if (pc_cnt_[k] > 0) return pc_sum_[k] / pc_cnt_[k];
    return pc_avg_cnt_[up] > 0 ? pc_avg_sum_[up] / pc_avg_cnt_[up] : -1.0;
  }

  void update_pseudo_cost(const Node& node, double obj, double parent_obj) {
    if (node.branch_var < 0 || node.branch_dist <= 0) return;
    const double gain = std::max(0.0, obj - parent_obj) / node.branch_dist;
    const int k = 2 * node.branch_var + (node.branch_up ? 1 : 0);
    pc_sum_[k] += gain;
    ++pc_cnt_[k];
    pc_avg_sum_[node.branch_up] += gain;
    ++pc_avg_cnt_[node.branch_up];
  }

  // Returns the branching variable or -1 when x is integral.
  int select_branch(const std::vector<double>& x) const {
    int best = -1;
    double best_score = -1;
    for (int j : ints_) {
      if (!branchable(j, x[j])) continue;
      const double f = x[j] - std::floor(x[j]);
      const double down = pseudo_cost(j, false), up = pseudo_cost(j, true);
      double score;
      if (down < 0 || up < 0) {
        score = std::min(f, 1 - f);  // most fractional until pseudo-costs exist
      } else {
        score = std::max(down * f, 1e-6) * std::max(up * (1 - f), 1e-6);  // product rule
      }
      if (score > best_score) {
        best_score = score;
        best = j;
      }
    }
    return best;
  }

  double global_bound(const Node* current) const {
    double b = open_.empty() ? kInf : open_.top()->bound;
    if (current != nullptr) b = std::min(b, current->bound);
    b = std::min(b, pruned_bound_);
    return b;
  }

  bool gap_closed(double bound) const {
    if (!has_inc_) return false;
    const double g = inc_obj_ - bound;
    return g <= opt_.abs_gap || g <= opt_.rel_gap * std::abs(inc_obj_ + sign_ * p_.objective_offset()) ||
           (integral_obj_ && g < 1.0 - 1e-6);
  }

  void process_tree(NodePtr first, bool is_root) {
    NodePtr node = std::move(first);
    std::vector<double> x(n_);
    double parent_obj = root_bound_;
    while (true) {
      if (node == nullptr) {
        // Drop nodes the incumbent has made useless, then take the best bound.
        while (!open_.empty() && open_.top()->bound >= cutoff()) {
          if (const DebugSolution* dbg = debug(*open_.top()))
            dbg->check_lower_bound(open_.top()->bound, [&] { return "open " + node_name(*open_.top()) + " pruned by bound"; });
          note_pruned(open_.top()->bound);
          open_.pop();
        }
        if (open_.empty()) return;
        node = open_.top();
        open_.pop();
        lp_.set_basis(*node->basis);
        parent_obj = node->bound;
      }
      if (gap_closed(global_bound(node.get()))) {
        open_.push(node);
        return;
      }
      if (Clock::now() > deadline_) {
        open_.push(node);
        stopped_ = Status::kTimeLimit;
        return;
      }
      if (opt_.node_limit >= 0 && nodes_ >= opt_.node_limit) {
        open_.push(node);
        stopped_ = Status::kNodeLimit;
        return;
      }
      ++nodes_;
      if (!is_root && !apply_node_bounds(*node)) {  // empty box: nothing in this node
        node = nullptr;
        continue;
      }
      const double cut = cutoff();
      LpStatus s = is_root ? LpStatus::kOptimal : lp_.solve(cut, deadline_);
      is_root = false;
      if (s == LpStatus::kIterationLimit) {
        lp_.reset_basis();
        s = lp_.solve(cut, deadline_);
        if (s == LpStatus::kIterationLimit) throw SolverError("milp: node LP hit the iteration limit");
      }
      if (s == LpStatus::kTimeLimit) {
        --nodes_;
        open_.push(node);
        stopped_ = Status::kTimeLimit;
        return;
      }
      if (s == LpStatus::kCutoff) {
        if (const DebugSolution* dbg = debug(*node))
          dbg->fail(node_name(*node) + " pruned by the LP cutoff " + DebugSolution::num(cut) +
                    " although it contains the debug solution (objective " + DebugSolution::num(dbg->objective()) + ")");
        note_pruned(cut);
        node = nullptr;
        continue;
      }
      if (s != LpStatus::kOptimal) {  // infeasible (unbounded cannot happen below a bounded root)
        if (const DebugSolution* dbg = debug(*node))
          dbg->fail(node_name(*node) + " LP reported infeasible although it contains the debug solution");
        node = nullptr;
        continue;
      }
      double obj = lp_.objective();
      if (const DebugSolution* dbg = debug(*node))
        dbg->check_lower_bound(obj, [&] { return node_name(*node) + " LP"; });
      update_pseudo_cost(*node, obj, parent_obj);
      if (obj >= cut) {
        note_pruned(obj);
        node = nullptr;
        continue;
      }
      for (int j = 0; j < n_; ++j) x[j] = lp_.value(j);
      int bv = select_branch(x);
      double bval = bv >= 0 ? x[bv] : 0.0;
      bool split = false;  // branching at an integral value (resolve_integral_node)
      if (bv < 0 && !take_integral_point(x)) {
        // Integral, but the point violates a row by more than feasibility_tol: the LP's
        // tolerance applies to its scaled rows, so a row with large coefficients admits a
        // larger unscaled violation. Dropping the node would lose every solution in it.
        ++integral_resolves_;
        bv = resolve_integral_node(x, obj, cut, bval);
        split = bv >= 0 && std::abs(x[bv] - std::round(x[bv])) <= opt_.integrality_tol;
        if (bv == kNodeDone) {
          node = nullptr;
          continue;
        }
        if (bv < 0) {  // every integer fixed and no acceptable completion: nothing left here
          if (const DebugSolution* dbg = debug(*node)) {
            std::vector<double> xr = x;
            for (int j : ints_) xr[j] = std::round(xr[j]);
            dbg->fail(node_name(*node) + " dropped: its integers are fixed and its LP point (objective " +
                      DebugSolution::num(obj) + ") is not accepted (rounded violation " +
                      DebugSolution::num(p_.max_violation(xr)) + ": " + check_solution(p_, xr).worst + ")");
          }
          node = nullptr;
          continue;
        }
      }
      if (bv < 0) {
        node = nullptr;
        continue;
      }
      if (opt_.heuristics) simple_rounding(x);
      // Without an incumbent, dive from every 64th node while diving has cost less than
      // a fifth of all LP iterations.
      if (!has_inc_ && nodes_ % 64 == 0 && dive_iterations_ * 5 < lp_.iterations()) run_dives();
      if (!split && strong_branching_init(x, obj)) bv = select_branch(x), bval = x[bv];
      node = branch(node, bv, bval, std::max(obj, node->bound));
      parent_obj = std::max(obj, node ? node->bound : obj);
    }
  }

  // Whether the integral LP point x with its integers rounded is feasible; if so it is
  // offered as incumbent. The unrounded point is never taken: an integer at 0.99999987
  // in a row with 1e6 coefficients hides an activity error of 0.13, and accepting it
  // reported a wrong optimum (48.98 for 50.37 on a generated instance).
  bool take_integral_point(const std::vector<double>& x) {
    std::vector<double> xr = x;
    for (int j : ints_) xr[j] = std::round(xr[j]);
    if (p_.max_scaled_violation(xr, opt_.feasibility_tol) > opt_.feasibility_tol) return false;
    try_incumbent(std::move(xr));
    return true;
  }

  // The completion of an integral point x: the LP with every integer fixed at its
  // rounded value, solved with a 100x tighter primal tolerance; a feasible point is
  // offered as incumbent. Leaves the integers fixed in the LP: the caller restores.
  void complete_rounded(const std::vector<double>& x) {
    const double saved_tol = lp_.primal_tol;
    for (int j : ints_) lp_.set_col_bounds(j, std::round(x[j]), std::round(x[j]));
    lp_.primal_tol = saved_tol * 1e-2;
    if (lp_.solve(kInf, deadline_) == LpStatus::kOptimal) {
      std::vector<double> y(n_);
      for (int j = 0; j < n_; ++j) y[j] = lp_.value(j);
      take_integral_point(y);
    }
    lp_.primal_tol = saved_tol;
  }

  static constexpr int kNodeDone = -2;

  // An integral LP point that is not feasible for the problem (see process_tree).
  // Re-solves the node with a 100x tighter primal tolerance; a fractional point is
  // branched on as usual, an acceptable one taken. Otherwise the integers are fixed at
  // their rounded values for a tight completion LP (a candidate incumbent), and unless
  // the node's bound is then no better than the cutoff, the node is split on an unfixed
  // integer column at its integral value (x <= r | x >= r + 1, or r - 1 | r at the upper
  // bound): the child holding the point has a smaller box, so this ends once every
  // integer is fixed. Returns the column to branch on (bval its split value), kNodeDone
  // when the node is finished, or -1 when every integer is fixed and nothing was found.
  int resolve_integral_node(std::vector<double>& x, double& obj, double cut, double& bval) {
    const double saved_tol = lp_.primal_tol;
    const std::vector<BasisStatus> basis = lp_.basis();
    lp_.primal_tol = saved_tol * 1e-2;
    const LpStatus s = lp_.solve(cut, deadline_);
    lp_.primal_tol = saved_tol;
    if (s == LpStatus::kOptimal) {
      obj = std::max(obj, lp_.objective());
      for (int j = 0; j < n_; ++j) x[j] = lp_.value(j);
      const int bv = select_branch(x);
      if (bv >= 0) {
        bval = x[bv];
        return bv;
      }
      if (take_integral_point(x)) return kNodeDone;
    } else {
      // The tighter LP gave up (an infeasible or cutoff verdict at 1e-9 is no proof:
      // the node is LP feasible at the normal tolerance). Back to the node's optimum.
      lp_.set_basis(basis);
      if (lp_.solve(cut, deadline_) != LpStatus::kOptimal) {
        pruned_bound_ = std::min(pruned_bound_, obj);  // keep the node in the result's bound
        return kNodeDone;
      }
      for (int j = 0; j < n_; ++j) x[j] = lp_.value(j);
    }
    // A completion with the integers fixed at their rounded values, then a split.
    const std::vector<BasisStatus> node_basis = lp_.basis();
    complete_rounded(x);
    for (int j : ints_) lp_.set_col_bounds(j, cur_lb_[j], cur_ub_[j]);
    lp_.set_basis(node_basis);
    lp_.solve(kInf, deadline_);  // back to the node's optimum for the branching
    if (obj >= cutoff()) {
      note_pruned(obj);
      return kNodeDone;
    }
    int result = -1;
    double best = -1;
    for (int j : ints_) {
      if (cur_lb_[j] >= cur_ub_[j]) continue;
      const double d = std::abs(x[j] - std::round(x[j]));
      if (d > best) best = d, result = j;
    }
    if (result >= 0) {
      const double r = std::round(x[result]);
      bval = r < cur_ub_[result] ? r + 0.5 : r - 0.5;
    } else {
      pruned_bound_ = std::min(pruned_bound_, obj);  // a leaf given up: keep its bound
    }
    return result;
  }

  // Pseudo-cost initialisation by strong branching (Achterberg, Koch and Martin,
  // "Branching rules revisited", Oper. Res. Letters 33, 2005: reliability branching with
  // reliability 1): up to kSbCandidates fractional columns without pseudo-costs, most
  // fractional first, get both children's LP solved for at most kSbIterations
  // iterations; the objective gains (a dual bound when stopped early) seed their pseudo-
  // costs. Strong branching stays within a tenth of all LP iterations. Returns whether
  // any pseudo-cost changed; the LP is back at the node's optimum afterwards.
  bool strong_branching_init(const std::vector<double>& x, double obj) {
    constexpr int kSbCandidates = 8;
    constexpr long kSbIterations = 60;
    if (sb_iterations_ * 10 > lp_.iterations() + 10000) return false;
    std::vector<std::pair<double, int>> cand;
    for (int j : ints_) {
      if (!branchable(j, x[j])) continue;
      const double f = x[j] - std::floor(x[j]);
      if (pc_cnt_[2 * j] > 0 && pc_cnt_[2 * j + 1] > 0) continue;
      cand.emplace_back(-std::min(f, 1 - f), j);
    }
    if (cand.empty()) return false;
    std::sort(cand.begin(), cand.end());
    if (cand.size() > static_cast<std::size_t>(kSbCandidates)) cand.resize(kSbCandidates);
    const std::vector<BasisStatus> basis = lp_.basis();
    const long saved_limit = lp_.iteration_limit, start = lp_.iterations();
    lp_.iteration_limit = kSbIterations;
    bool changed = false;
    for (const auto& [neg_frac, j] : cand) {
      for (const bool up : {false, true}) {
        const double lo = cur_lb_[j], hi = cur_ub_[j];
        if (up) lp_.set_col_bounds(j, std::ceil(x[j]), hi);
        else lp_.set_col_bounds(j, lo, std::floor(x[j]));
        const LpStatus st = lp_.solve(kInf, deadline_);
        if (st == LpStatus::kOptimal || st == LpStatus::kIterationLimit) {
          const double dist = up ? std::ceil(x[j]) - x[j] : x[j] - std::floor(x[j]);
          const double gain = std::max(0.0, lp_.objective() - obj) / dist;
          const int k = 2 * j + (up ? 1 : 0);
          pc_sum_[k] += gain;
          ++pc_cnt_[k];
          pc_avg_sum_[up] += gain;
          ++pc_avg_cnt_[up];
          changed = true;
        }
        lp_.set_col_bounds(j, lo, hi);
        lp_.set_basis(basis);
      }
      if (time_up()) break;
    }
    lp_.iteration_limit = saved_limit;
    sb_iterations_ += lp_.iterations() - start;
    lp_.solve(kInf, deadline_);  // back to the node's optimum (no pivots)
    return changed;
  }

  bool time_up() const { return Clock::now() > deadline_; }

  // Fractional then coefficient diving from the LP optimum just computed (diving.hpp);
  // afterwards the LP is back at that optimum with its bounds and basis.
  void run_dives() {
    if (!opt_.heuristics || ints_.empty()) return;
    const std::vector<BasisStatus> basis = lp_.basis();
    DiveContext ctx{&ints_, &down_locks_, &up_locks_, opt_.integrality_tol, kInf,
                    std::max(1000L, lp_.iterations() / 4), deadline_};
    for (const DiveRule rule : {DiveRule::kFractional, DiveRule::kCoefficient}) {
      ctx.cutoff = cutoff();
      std::vector<double> rejected;  // an integral dive point whose rounding is infeasible
      dive_iterations_ += dive(lp_, ctx, rule, cur_lb_, cur_ub_, [&](const std::vector<double>& x) {
        if (!take_integral_point(x)) rejected = x;
      });
      if (!rejected.empty()) complete_rounded(rejected);
      for (int j : ints_) lp_.set_col_bounds(j, cur_lb_[j], cur_ub_[j]);
      lp_.set_basis(basis);
    }
    lp_.solve(kInf, deadline_);
  }

  void note_pruned(double bound) {
    // Nodes pruned by the gap tolerance (not by a strict cutoff) still bound the optimum.
    if (!has_inc_) return;
    if (integral_obj_ && bound >= inc_obj_ - 1.0 + 1e-6) return;
    if (bound < inc_obj_) pruned_bound_ = std::min(pruned_bound_, bound);
  }

  // Creates both children; returns the one to dive into (the other goes to the queue).
  NodePtr branch(const NodePtr& node, int j, double v, double obj) {
    auto basis = std::make_shared<const std::vector<BasisStatus>>(lp_.basis());
    auto make = [&](bool up) {
      auto c = std::make_shared<Node>();
      c->parent = node;
      c->basis = basis;
      c->bound = obj;
      c->id = next_id_++;
      c->depth = node->depth + 1;
      c->branch_var = j;
      c->branch_up = up;
      c->branch_dist = up ? std::ceil(v) - v : v - std::floor(v);
      if (up) c->changes.push_back({j, std::ceil(v), kInf});
      else c->changes.push_back({j, -kInf, std::floor(v)});
      c->debug_in = node->debug_in && dbg_ && dbg_->in_bounds(j, c->changes[0].lb, c->changes[0].ub);
      local_reduced_cost_fixing(*c, obj);
      if (c->debug_in) {
        const DebugSolution* dbg = debug(*c);
        for (std::size_t k = 1; k < c->changes.size(); ++k) {
          const BoundChange& bc = c->changes[k];
          if (dbg != nullptr)
            dbg->check_bounds(bc.var, bc.lb, bc.ub, [&] {
              return "local reduced-cost fixing in " + node_name(*c) + " (parent LP bound " +
                     DebugSolution::num(obj) + ", cutoff " + DebugSolution::num(cutoff()) + ")";
            });
          c->debug_in = c->debug_in && dbg_->in_bounds(bc.var, bc.lb, bc.ub);
        }
      }
      return c;
    };
    const double f = v - std::floor(v);
    const double pd = pseudo_cost(j, false), pu = pseudo_cost(j, true);
    const bool up_first = (pd < 0 || pu < 0) ? f >= 0.5 : pu * (1 - f) <= pd * f;
    NodePtr first = make(up_first), second = make(!up_first);
    open_.push(second);
    // Plunge only while the node stays close to the best bound (Achterberg §6.1).
    if (has_inc_) {
      const double best = std::min(open_.top()->bound, obj);
      if (obj - best > 0.5 * (inc_obj_ - best)) {
        open_.push(first);
        return nullptr;
      }
    }
    return first;
  }

  // Node-local reduced-cost tightening from the LP just solved (children inherit it).
  void local_reduced_cost_fixing(Node& child, double obj) {
    if (!has_inc_) return;
    const double gap = cutoff() - obj;
    if (!(gap < kInf) || gap < 0) return;
    for (int j : ints_) {
      if (lp_.is_basic(j) || cur_lb_[j] == cur_ub_[j]) continue;
      const double d = lp_.reduced_cost(j);
      if (d > 1e-7) {
        const double newub = cur_lb_[j] + std::floor(gap / d + 1e-9);
        if (newub < cur_ub_[j]) child.changes.push_back({j, -kInf, newub});
      } else if (d < -1e-7) {
        const double newlb = cur_ub_[j] - std::floor(gap / -d + 1e-9);
        if (newlb > cur_lb_[j]) child.changes.push_back({j, newlb, kInf});
      }
    }
  }

  Result& finish(Result& res, Status st) {
    finish_status(res, st);
    if (opt_.verbose && integral_resolves_ > 0)
      std::cerr << "milp: " << integral_resolves_ << " integral LP points were rejected and re-solved\n";
    if (const DebugSolution* dbg = debug()) {
      if (res.status == Status::kInfeasible)
        dbg->fail("the solve ends infeasible although the debug solution is feasible");
      if (res.status == Status::kOptimal)
        dbg->fail("the solve ends optimal with objective " + DebugSolution::num(inc_obj_) +
                  ", worse than the debug solution's " + DebugSolution::num(dbg->objective()) +
                  " (internal minimisation units)");
    }
    return res;
  }

  void finish_status(Result& res, Status st) {
    res.nodes = nodes_;
    res.lp_iterations = lp_.iterations();
    res.seconds = seconds();
    if (has_inc_) {
      res.solution = inc_x_;
      res.objective = p_.evaluate(inc_x_);
    }
    double bound;
    if (st == Status::kInfeasible || st == Status::kUnbounded) {
      res.status = st;
      res.bound = st == Status::kUnbounded ? -sign_ * kInf : sign_ * kInf;
      res.gap = kInf;
      return;
    }
    if (st == Status::kOptimal && open_.empty()) {
      bound = has_inc_ ? std::min(inc_obj_, pruned_bound_) : kInf;
    } else {
      bound = std::min(global_bound(nullptr), has_inc_ ? inc_obj_ : kInf);
      if (nodes_ == 0 && open_.empty()) bound = -kInf;
    }
    if (st == Status::kOptimal && !has_inc_) st = Status::kInfeasible;
    if (st == Status::kOptimal && !gap_closed(bound) && !open_.empty()) st = Status::kTimeLimit;
    // With an integral objective no value strictly between two integers is attainable.
    if (integral_obj_ && std::isfinite(bound)) bound = std::ceil(bound - 1e-6);
    if (has_inc_) bound = std::min(bound, inc_obj_);
    res.status = st;
    res.bound = sign_ * bound + p_.objective_offset();
    if (has_inc_)
      res.gap = std::abs(res.objective - res.bound) / std::max(std::abs(res.objective), 1e-10);
  }

  const Problem& p_;
  const Options& opt_;
  DualSimplex lp_;
  int n_;
  Clock::time_point start_, deadline_;
  double sign_ = 1;
  std::vector<double> lb0_, ub0_, cur_lb_, cur_ub_, root_d_;
  std::vector<int> ints_, down_locks_, up_locks_;
  bool integral_obj_ = true, has_inc_ = false;
  double inc_obj_ = kInf, root_bound_ = -kInf, pruned_bound_ = kInf;
  std::vector<double> inc_x_;
  std::vector<double> pc_sum_;
  std::vector<int> pc_cnt_;
  double pc_avg_sum_[2] = {0, 0};
  long pc_avg_cnt_[2] = {0, 0};
  std::priority_queue<NodePtr, std::vector<NodePtr>, NodeOrder> open_;
  long nodes_ = 0, next_id_ = 0, dive_iterations_ = 0, sb_iterations_ = 0;
  Status stopped_ = Status::kOptimal;
  std::unique_ptr<DebugSolution> dbg_;
  long integral_resolves_ = 0;
};

}  // namespace detail

/// Solves the MILP `p`: the one entry point.
///
///     milp::Problem p;
///     int x = p.add_var(0, 10, -1.0, milp::VarType::kInteger);
///     p.add_row({{x, 2.0}}, -milp::kInf, 7.0);
///     milp::Result r = milp::solve(p);   // r.status == kOptimal, r.objective == -3
///
/// Never throws for infeasible/unbounded problems or limits (see Result::status);
/// throws ConfigError for invalid options and SolverError on an internal failure.
/// Worst case exponential in the number of integer variables; deterministic.
inline Result solve(const Problem& p, const Options& options = {}) {
  options.validate();
  return detail::presolve_and_solve(p, options, [](const Problem& q, const Options& o) { return detail::BranchAndBound(q, o).run(); });
}

}  // namespace disagmoe::milp
